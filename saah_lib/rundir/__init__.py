"""The run folder, as the library writes it: its layout and log keys (:mod:`.layout`) and its writing
(:mod:`.folder`). Reading, checking, locking and checkpoints are the lab's (:mod:`saah_lab.rundir`)."""
