"""Running model-written code and user regexes where they cannot harm or hang labctl: throwaway containers."""
