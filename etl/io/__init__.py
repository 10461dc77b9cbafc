"""The edges: the Spark session, the Delta tables, the landing zone, the layout file, the load lock
and what the warehouse's tables say about runs."""
