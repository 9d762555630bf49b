"""A whole pipeline's plan: every topic, child Log and Spark application it would create."""
