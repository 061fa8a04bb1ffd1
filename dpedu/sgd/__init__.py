"""Stochastic gradient descent and what batch size, learning rate and staleness do to it (lessons 01, 05, 06).

- ``training``: mini-batch SGD that records its own history (lessons 01 and 06).
- ``least_squares``: the convex problem whose answers are known exactly (lessons 01, 05, 06).
- ``noisy_quadratic``: SGD's expected loss in closed form, for any batch size and learning rate (lesson 06).
- ``noise_scale``: the gradient noise scale B_simple (lesson 06).
- ``staleness``: gradient descent with delayed gradients, and where it diverges (lesson 05).
- ``hogwild``: processes training one model in shared memory without locks (lesson 05).
- ``local_sgd``: communicating less often, local SGD and DiLoCo against synchronous SGD (lesson 05).
"""
