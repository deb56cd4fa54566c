"""Renderers: results in, text out. Each command's results have their module here: `check`
(text, JSON, SARIF, GitHub), `rules` (the rule catalogue and one rule's docs, for every surface),
`verify`, `bench` and `fix` (terminal text). The HTML report is `gpulint.report`; `inspect`'s
summary renders itself in `gpulint.summary`."""
