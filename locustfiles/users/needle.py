"""Needle in a haystack: is the code word hidden at 10/50/90% of a long prompt found (needle.py)?"""

from bench_tasks import haystack, prompt
from bench_tasks.tokens import token_counter
from locustfiles.users.job_user import JobUser

ANSWER_TOKENS = 32


class NeedleUser(JobUser):
    scenario = "needle"

    def run_job(self, job) -> None:
        word, opening = haystack.code_word(job.index), self.opening(job.phase, job.index)
        count = self.llm.activity.noted(token_counter(self.environment.host, self.target.profile,
                                                      self.target.model, self.target.api_key,
                                                      self.options.read_timeout))
        messages, _ = prompt.calibrate(
            lambda n: haystack.needle_messages(n, job.depth, word, seed=1000 + job.index, opening=opening),
            count, job.size)

        def judge(record, recorder) -> None:
            record.needle_found = haystack.found(recorder.answer_text, word) if record.ok else None

        record = self.job_record(job, prompt_size=job.size, needle_depth=job.depth)
        self.stream_chat(record, messages, ANSWER_TOKENS, judge=judge)
