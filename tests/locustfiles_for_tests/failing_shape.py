"""The quick suite whose shape raises in tick once the burst phase has begun."""

from locustfiles.quick_suite import ChatQuestionUser, QuickSuite  # noqa: F401 - what Locust runs


class BrokenSuite(QuickSuite):
    def tick(self):
        phase = getattr(self, "coordinator", None) and self.coordinator.phase
        if phase is not None and phase.scenario == "burst":
            raise LookupError("injected in the shape's tick")
        return super().tick()


QuickSuite = None  # noqa: F811 - one shape per locustfile: this one
