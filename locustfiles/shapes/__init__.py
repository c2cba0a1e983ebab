"""The shapes of the suite and the capacity search: a LoadTestShape that follows a coordinator (phased.py),
subclassed by the runnable locustfiles with the users of their scenarios."""
