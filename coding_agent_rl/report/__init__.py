"""The HTML report of a run directory (``coding-agent-rl view``).

``load.py`` reads the run, ``stats.py`` computes the summary, ``tokens.py`` decodes token ids,
``payload.py`` packs each rollout's detail as compact JSON, ``html.py`` renders the page from
the templates in ``assets/`` (one self-contained file: inline CSS and JS, no external URL).
"""

from coding_agent_rl.report.html import DEFAULT_MAX_ROLLOUTS, render_html, render_report
from coding_agent_rl.report.load import RunData, load_run

__all__ = ["DEFAULT_MAX_ROLLOUTS", "RunData", "load_run", "render_html", "render_report"]
