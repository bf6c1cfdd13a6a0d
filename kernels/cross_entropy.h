// Scaffold: the cross_entropy kernel family (issue #3) is being written on its own branch.
#pragma once
