"""`scgmem-report view`: a static, offline site to see a run's answers question by question.

    scgmem-report view --runs results/embedded/locomo_full --out /tmp/view        # then open /tmp/view/index.html
    scgmem-report view --runs RUN_A RUN_B --out /tmp/view --serve 8600           # also serve it on 127.0.0.1

`extract` reads the runs (through the reports' checked reader) into the page's data, `recall_path`
rebuilds SCG-Mem's recall path of a question from its record and the memory export, `stats` computes
the category tables and paired tests as the reports do, and `site` writes the assets and the data.
The page (assets/) is plain JavaScript that builds its DOM from text nodes only, under a
Content-Security-Policy that loads nothing from outside the folder. docs/viewer.md describes it.
"""
from scgmem.report.view.site import build_site, serve

__all__ = ["build_site", "serve"]
