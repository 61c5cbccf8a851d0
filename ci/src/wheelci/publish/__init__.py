"""What the publishing stages are made of: `wheelci index` (a static simple index for a directory of
distributions) and `wheelci upload` (twine, then the index's own pages checked). Below the stages, so
that each stage module keeps its command and its flow while the concepts it uses live one per module
here; neither stage imports the other."""
