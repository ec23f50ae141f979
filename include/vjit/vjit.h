#pragma once
// The public API of vjit in one include.
#include "vjit/engine.h"
#include "vjit/error.h"
#include "vjit/graph.h"
#include "vjit/ir.h"
#include "vjit/model.h"
#include "vjit/optimizer.h"
#include "vjit/options.h"
#include "vjit/program.h"
#include "vjit/reference.h"
#include "vjit/run.h"
#include "vjit/shape.h"
#include "vjit/train.h"
