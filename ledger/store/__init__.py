"""The system of record: tables, column types, engine and sessions, settings, presets, migrations, backup, ingest."""
