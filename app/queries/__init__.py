"""What the pages read: the ledger's figures through cached functions (the CLI's own), the planner's and rent-vs-own's inputs, and the runs the Launch page starts."""
