"""The capacity search: how many students can the server seat before the SLO breaks?

Each module has one job (none imports Locust; each is pure, clock injected):

- ``search_options``: the search's options and the parsers of ``--start-students`` and ``--step``
  (what the command line imports, without the search);
- ``search``: ``Search``, the users' protocol (take, done, forget, record), handed to the probe first,
  then to the steps;
- ``probe``: what the server is made of, measured in about a minute (its slots, decode and prefill
  rates, its answers' lengths);
- ``queue_model``: the queueing model of the class, which predicts the knee from the probe's figures;
- ``steps``: the state machine of the steps (settle, the judged window, its answers and records, the
  verdict, the next class), and no window that waits forever;
- ``policy``: which class comes next (``Gallop`` from the predicted knee, ``Ladder`` from a number)
  and what the verdicts conclude;
- ``time_left``: how long the search will still take, if the model is right;
- ``lines``: the search in words (the probe's line, each verdict's line).

The verdict on a window is ``bench_tasks.slo.judge``, shared with the report; the class's students are
``bench_tasks.classroom``'s. This file imports nothing: importing one module loads only what it needs.
"""
