"""The shapes of the suite, the capacity search and the open loop (rate.py): a LoadTestShape that follows a coordinator (phased.py),
subclassed by the runnable locustfiles with the users of their scenarios."""
