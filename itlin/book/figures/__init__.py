"""The book's figures, one module per paper: :mod:`~itlin.book.figures.main` (Goldwaser & Ge;
its quintic regression, Fig. 9 and the live demo, in :mod:`~itlin.book.figures.quintic`),
:mod:`~itlin.book.figures.arbel` (Arbel et al.) and :mod:`~itlin.book.figures.ortiz`
(Ortiz-Jimenez et al.), and one per chapter whose figures are its own (e.g.
:mod:`~itlin.book.figures.feature_updates`). Each function takes a record (or what a study's ``summary``/``rows``
return) and returns a matplotlib figure in the house style (:mod:`itlin.book.plotting`).
Experiments never draw; chapters call these beside their captions.
"""
