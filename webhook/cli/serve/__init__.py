"""The serving subcommands, one module each (`gpushare webhook`, `extender`, `device-plugin`, `dra-driver`):
flags and env -> a part's settings -> its `run`; `nodeagent.py` holds what the two node agents share."""
