"""What people see: terminal tables, per-job files, PNG plots and a self-contained HTML report."""
