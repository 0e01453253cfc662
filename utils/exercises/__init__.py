"""Checks for each chapter's exercises: ``from utils.exercises.ch01 import check_parallel``."""
