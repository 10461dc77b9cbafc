"""Active data warehouse ETL: surrogate keys and duplicate detection over a bursty update stream.

Importing the package is cheap (no Spark, no Airflow, no Great Expectations): DAG files import it
at parse time.
"""

__version__ = "0.1.0"
