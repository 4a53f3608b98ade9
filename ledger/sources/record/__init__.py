"""The run's record: the journal (files that survive a crash), its replay into the ledger, the writer thread, the phase vocabulary and the sanitizing of values before they are written."""
