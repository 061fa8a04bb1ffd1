"""Lesson 14: from the course's loops to the tools that wrap them.

Modules:
- ``accelerate_loop``: one training loop written by hand with DDP and with Hugging Face ``accelerate``, each
  recording what it did, so that the lesson can assert where the two agree and where they divide the work.
"""
