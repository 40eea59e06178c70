"""The task: problems and splits (:mod:`.problems`), GSM8K (:mod:`.gsm8k`), the CPU stand-in
(:mod:`.synthetic`), prompts (:mod:`.prompts`) and scoring completions (:mod:`.scoring`)."""
