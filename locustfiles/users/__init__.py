"""The users of every workload: Locust User classes, imported by the runnable locustfiles.

``llm_user.LLMUser`` sends one streamed request, measures it and records it; ``job_user.JobUser`` takes
its requests from the run's coordinator. A user reaches its run as ``self.llm`` (the environment's
LLMRun: options, target, link to the coordinator, this run's workload state).
"""
