#pragma once
// The public API of vjit in one include.
#include "vjit/error.h"
#include "vjit/graph.h"
#include "vjit/ir.h"
#include "vjit/model.h"
#include "vjit/program.h"
#include "vjit/reference.h"
#include "vjit/shape.h"
