"""The robust aggregation rules, one module each, registered in :data:`fedrun.robust.base.DEFENCES`."""
