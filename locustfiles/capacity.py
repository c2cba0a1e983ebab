"""How many students can this server take? A short probe of the server, then classes of students
from the predicted knee until the boundary of the SLO is found.

    locust -f locustfiles/capacity.py --host URL --slo ttft_p95=1.0 --headless   # ends by itself

The students are classroom.py's; here each question is handed out by the search (bench_tasks.capacity.search),
which labels it with the step it belongs to and judges each step's window from its records. The probe's
requests (bench_tasks.capacity.probe) are the suite's bursts and fresh prompts, and the classroom's first questions.
"""

from bench_tasks.capacity import probe
from locustfiles import llm_run
from locustfiles.shapes.capacity import CapacityShape
from locustfiles.users.classroom import SearchedStudent
from locustfiles.users.probe import ProbeUser


class Capacity(CapacityShape):
    users = {"classroom": SearchedStudent, probe.SCENARIO: ProbeUser}


llm_run.install()
