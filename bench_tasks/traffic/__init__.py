"""The user's own traffic: prompt files, ShareGPT conversations and Mooncake traces, read as streams.

- ``items``: a JSON file's items one at a time with the line each starts on (JSON lines, or one JSON
  array read incrementally), and ``TrafficError``: every problem of a file as ``file:line: what``.
- ``dataset``: prompt files (``{"prompt"}`` / ``{"messages"}`` lines) and ShareGPT conversations,
  checked whole in one pass, then read again request by request; a conversation is replayed turn by
  turn with the model's own answers (or the file's) fed back.
- ``trace``: Mooncake traces (timestamp, input_length, output_length, hash_ids), the trace's own
  prefix reuse, and prompts synthesized to exactly each request's input length.
- ``vocabulary``: the words that are one token each on the server under test, measured once per run
  through its tokenizer; every synthesized text is made of them.
- ``prefixes``: ``--prefix-tokens N --prefixes K``, K groups of requests opening with a shared prefix
  of exactly N tokens.

No file is ever held whole in memory, and nothing here sends a request to be measured.
"""
