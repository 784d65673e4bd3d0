"""Ortiz-Jimenez, Moosavi-Dezfooli & Frossard's experiments (linearised networks and the NTK):
eigenfunctions as targets, and energy concentration."""
