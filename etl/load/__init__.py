"""The load: a run's micro-batches through the chosen strategy, each committed exactly once."""
