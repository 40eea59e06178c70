"""The method as pure functions: token weights and the loss (:mod:`.loss`), the reward (:mod:`.reward`),
and the methods' names and alphas (:mod:`.methods`). No I/O, no TRL, no model."""
