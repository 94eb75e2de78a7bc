"""Training the MT, LM and MLM models on identical data with fairseq (issue 3)."""
