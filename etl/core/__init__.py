"""The pure core: types, configuration, the strategy registry, layouts and the join policies.

Nothing here imports pyspark, delta or great_expectations (a test holds it so): the simulator,
the DAG files at parse time and the policy tests run on plain Python."""
