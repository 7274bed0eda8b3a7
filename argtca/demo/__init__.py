"""The offline demo: procedural dataset (render, generator), attribute file (attributes, assets/),
demo CLIP training (captions, augment, model, train_clip), weight file (checkpoint) and evaluation
(evaluate). See docs/DEMO.md."""
