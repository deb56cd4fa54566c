"""gpulint inside Model Explorer: a node-data-provider extension (`gpulint.explorer.main`).

Model Explorer (`pip install ai-edge-model-explorer`) loads it by module name:

    model-explorer model.tflite --extensions=gpulint.explorer

and offers "gpulint" in its UI; the provider runs `check` on the model it shows and colours each op
by placement. Nothing in gpulint's own commands imports this package: Model Explorer is an optional
extra, and `gpulint.explorer.main` needs it.
"""
