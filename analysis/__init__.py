"""Django-free statistics for memeval: standardization, quality control, tests, tables, plots, writers.

Entry points: :func:`analysis.report.analyze` (ratings DataFrame -> JSON-ready dict; the settings are an
:class:`analysis.spec.AnalysisSpec` or its fields), :mod:`analysis.writers` (Markdown, LaTeX, HTML, CSV),
:mod:`analysis.plots` (SVG strings), :mod:`analysis.agreement` (Fleiss' kappa, Krippendorff's alpha),
:mod:`analysis.calibration` and :mod:`analysis.planning` (simulation of study designs), :mod:`analysis.prereg`
(pre-registration), and the CLI ``python -m analysis report|calibrate|plan``.
"""
