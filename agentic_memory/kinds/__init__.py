"""The kinds of long-term memory: facts, episodes, rules, messages and knowledge."""
