"""The application file handed to spark-submit (by the Airflow DAG): the ``etl`` CLI as a script."""

import sys

from etl.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main())
