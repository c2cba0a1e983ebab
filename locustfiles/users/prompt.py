"""Fresh long prompts, one at a time: how fast does the server read a prompt it has never seen (prompt.py)."""

from bench_tasks import prompt
from bench_tasks.tokens import token_counter
from locustfiles.users.job_user import JobUser

# The figure is the first token; a short answer keeps the phase quick, and ignore_eos (where the
# engine accepts it) keeps an answer that would end at once from leaving no first token to time.
ANSWER_TOKENS = 16


class PromptUser(JobUser):
    scenario = "prompt"

    def run_job(self, job) -> None:
        opening = self.opening(job.phase, job.round, job.index)
        count = self.llm.activity.noted(token_counter(self.environment.host, self.target.profile,
                                                      self.target.model, self.target.api_key,
                                                      self.options.read_timeout))
        messages, _ = prompt.calibrate(lambda n: prompt.fresh_prompt(opening, n, seed=job.index), count, job.size)
        self.stream_chat(self.job_record(job, prompt_size=job.size), messages, ANSWER_TOKENS, ignore_eos=True)
