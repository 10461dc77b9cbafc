"""Pure Spark functions (DataFrame -> DataFrame, key -> Column): no reads, no writes."""
