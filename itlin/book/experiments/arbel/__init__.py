"""Arbel, Menegaux & Wolinski's experiments (damped Gauss-Newton in kernel form): their Figures
1-4 and the MNIST experiment, on a teacher-student task."""
