"""Django-free statistics for memeval: standardization, quality control, tests, tables, plots, writers.

Entry points: :func:`analysis.report.analyze` (ratings DataFrame -> JSON-ready dict),
:mod:`analysis.writers` (Markdown, LaTeX, HTML, CSV), :mod:`analysis.plots` (SVG strings),
:mod:`analysis.agreement` (Fleiss' kappa, Krippendorff's alpha) and the CLI ``python -m analysis report``.
"""
