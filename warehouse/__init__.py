"""Table schemas and layout of the warehouse, as code."""
