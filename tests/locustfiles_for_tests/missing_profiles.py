"""The quick suite on an install whose engine profiles are gone: every user's on_start fails."""

from bench_tasks import engine
from locustfiles.quick_suite import ChatQuestionUser, QuickSuite  # noqa: F401 - what Locust runs

engine.PROFILES_PACKAGE = "configs_that_were_not_installed"
