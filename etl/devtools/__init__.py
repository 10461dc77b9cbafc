"""Tools for trying the ETL out and testing it: not used by the jobs themselves."""
