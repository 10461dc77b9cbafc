"""How the jobs are started: the ``etl`` command, spark-submit's application file, and what the DAG
files import at parse time (nothing heavy)."""
