"""The main paper's experiments (Goldwaser & Ge): its Figures 2-9 and the book's own studies of
iterative linearisation (the quintic demo, adaptive schedules)."""
