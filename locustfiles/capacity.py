"""How many students can this server take? Classes of students, grown until the SLO breaks.

    locust -f locustfiles/capacity.py --host URL --slo ttft_p95=1.0 --headless   # ends by itself

The students are classroom.py's; here each question is handed out by the search (bench_tasks.capacity),
which labels it with the step it belongs to and judges each step's window from its records.
"""

from locustfiles import classroom, messaging
from locustfiles.coordination import CapacityShape


class SearchedStudent(classroom.Student):
    def seat(self):
        return messaging.work(self.environment).take(self.scenario, self.user_id)

    def leave(self, job) -> None:
        messaging.work(self.environment).done(job, self.user_id)


class Capacity(CapacityShape):
    users = {"classroom": SearchedStudent}
