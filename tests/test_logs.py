import logging

from seqlab.logs import quiet_loggers


def test_the_named_loggers_and_their_descendants_are_silenced_and_restored(caplog):
    parent, child = logging.getLogger("seqlab_test_lib"), logging.getLogger("seqlab_test_lib.agent")
    neighbour = logging.getLogger("seqlab_test_library")  # shares the prefix string, not the hierarchy
    child.setLevel(logging.DEBUG)  # a level of its own, which the parent's level alone would not override
    with caplog.at_level(logging.DEBUG), quiet_loggers(["seqlab_test_lib"], logging.CRITICAL):
        child.error("hidden")
        logging.getLogger("seqlab_test_lib.new").warning("hidden too")  # created inside: inherits the parent's
        parent.critical("shown")
        neighbour.warning("also shown")
    assert [r.getMessage() for r in caplog.records] == ["shown", "also shown"]
    assert (parent.level, child.level, neighbour.level) == (logging.NOTSET, logging.DEBUG, logging.NOTSET)
