"""Speculative decoding's value, measured with a real trained pair (issue 26; docs/gpu.md,
"Speculative value"): AR, DFLASH and DDTREE servers of the patched pin side by side.
``python3 -m tools.gpu.spec_value {prepare,run,merge,chain-batch,project}`` (cli).

Its modules, one concept each: ``plan`` (the servers' flags, ports and order, the stages and
models: pure), ``prepare`` (the CPU machine's prompt set and the target's parts), ``train``
(the answering server, the drafter's training and its record), ``servers`` (the servers as
process groups), ``measure`` (rounds, one server at a time, the profile), ``run`` (a `run` from
its inputs to its report), ``merge`` (separate runs as rounds of one), ``reports`` (reading a
finished report: chain-batch, project), ``cli`` (the command line)."""
