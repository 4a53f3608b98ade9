"""What the pages draw: presentation helpers (labels from the metrics layer, rounding, charts), the sections several pages share, and each page's gate (access by role)."""
