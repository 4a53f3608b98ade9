"""Reports over the money: the monthly export (CSV/XLSX/JSON), the daily and weekly reports, presentation."""
