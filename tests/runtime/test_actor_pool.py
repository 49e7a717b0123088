"""Jobs of a sweep on the same records reuse the silo actors (one shared local Ray instance)."""

import numpy as np
import pytest

from fedray.plan import make_plan
from fedray.runtime.driver import ActorPool, run
from tests.conftest import compose

pytestmark = pytest.mark.ray

POOL = ActorPool()


@pytest.fixture(autouse=True)
def _release_pooled_actors():
    yield
    POOL.drop_all()  # idle pooled actors hold CPU shares that other tests' actors need

SMALL = ["data=synthetic", "data.spec.num_silos=6", "data.spec.samples_per_silo=50", "data.spec.dim=4",
         "participation.silos_per_round=4", "num_rounds=5", "algorithm.batch_size=10", "progress=false",
         "privacy.enforce_budget=false", "runtime.num_actors=2"]


@pytest.mark.slow
def test_a_job_on_the_same_records_reuses_the_actors_and_gets_the_result_of_fresh_ones(ray_local):
    POOL.drop_all()
    first = run(pool=POOL, plan=make_plan(compose(*SMALL, "algorithm=isrl_dp_local_sgd", "algorithm.step_size=0.1")))
    actors = list(POOL.actors)
    reused = run(pool=POOL, plan=make_plan(compose(*SMALL, "privacy.epsilon_grid=[1,3]", "algorithm.step_size=[0.5,1]")))
    assert [a._actor_id for a in POOL.actors] == [a._actor_id for a in actors]

    POOL.drop_all()
    fresh = run(pool=POOL, plan=make_plan(compose(*SMALL, "privacy.epsilon_grid=[1,3]", "algorithm.step_size=[0.5,1]")))
    assert [a._actor_id for a in POOL.actors] != [a._actor_id for a in actors]
    np.testing.assert_array_equal(reused.last_iterate, fresh.last_iterate)
    assert first.last_iterate.shape[0] == 1


@pytest.mark.slow
def test_another_trial_reloads_its_records_into_the_same_actors(ray_local):
    POOL.drop_all()
    run(pool=POOL, plan=make_plan(compose(*SMALL, "trial=0")))
    before = [a._actor_id for a in POOL.actors]
    reloaded = run(pool=POOL, plan=make_plan(compose(*SMALL, "trial=1")))
    assert [a._actor_id for a in POOL.actors] == before
    POOL.drop_all()
    fresh = run(pool=POOL, plan=make_plan(compose(*SMALL, "trial=1")))
    np.testing.assert_array_equal(reloaded.last_iterate, fresh.last_iterate)
    assert [h["train_loss"][0] for h in reloaded.history] == [h["train_loss"][0] for h in fresh.history]


@pytest.mark.slow
def test_another_layout_starts_new_actors(ray_local):
    run(pool=POOL, plan=make_plan(compose(*SMALL)))
    before = {a._actor_id for a in POOL.actors}
    run(pool=POOL, plan=make_plan(compose(*SMALL, "runtime.num_actors=3")))
    assert len(POOL.actors) == 3 and not before & {a._actor_id for a in POOL.actors}
