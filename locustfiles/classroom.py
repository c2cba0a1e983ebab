"""A class of students: each arrives, asks, reads the answer, thinks, and asks again, resending the
whole conversation (bench_tasks.classroom). In the web UI, choose the class size:

    locust -f locustfiles/classroom.py --host URL --think-time 10-40 [--paste-share 0.1 --paste-size 4k]
"""

from locustfiles import llm_run
from locustfiles.users.classroom import Student  # noqa: F401 - what Locust runs

llm_run.install()
