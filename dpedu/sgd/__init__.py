"""Stochastic gradient descent and what batch size, learning rate and staleness do to it (lessons 01, 06, 07).

- ``training``: mini-batch SGD that records its own history (lessons 01 and 07).
- ``least_squares``: the convex problem whose answers are known exactly (lessons 01, 06, 07).
- ``noisy_quadratic``: SGD's expected loss in closed form, for any batch size and learning rate (lesson 07).
- ``noise_scale``: the gradient noise scale B_simple (lesson 07).
- ``staleness``: gradient descent with delayed gradients, and where it diverges (lesson 06).
- ``hogwild``: processes training one model in shared memory without locks (lesson 06).
- ``local_sgd``: communicating less often, local SGD and DiLoCo against synchronous SGD (lesson 06).
"""
