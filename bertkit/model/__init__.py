"""The model: the reference encoder (encoder.py) and its speed paths behind one switch
(fast.py), the pretraining heads (heads.py), FLOP formulas (flops.py), Hugging Face directories
in and out (hub.py), models named on the Hugging Face Hub (fetch.py), a fresh model from a
preset (create.py), what a model directory holds (info.py), and fill-mask."""
