-- Argo CD health check for etcd-hook's kinds, EtcdCluster, EtcdBackup and
-- EtcdRestore (etcd.database.coreos.com/v1beta2). It reads the conditions
-- the hook writes with kstatus's meaning (Ready, Reconciling, Stalled), in
-- kstatus's order, so that Argo CD and Flux agree on every status:
--   no status yet, or an older generation   Progressing
--   status.controlPaused (spec.paused)      Suspended
--   Stalled=True                            Degraded
--   Reconciling=True                        Progressing
--   Ready=True                              Healthy
--   anything else                           Progressing
-- Argo CD runs health checks with Lua's base and table libraries only, so
-- this uses neither string.* nor os.*.
local hs = {}

local function find(conditions, wanted)
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function describe(c)
  local text = c.reason or c.type
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-hook to write the first status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-hook to observe generation " .. tostring(generation)
  return hs
end

local ready = find(status.conditions, "Ready")
if status.controlPaused == true then
  hs.status = "Suspended"
  hs.message = "spec.paused is true: etcd-hook leaves the cluster as it is"
  if ready ~= nil then
    hs.message = describe(ready)
  end
  return hs
end

local stalled = find(status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local reconciling = find(status.conditions, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

hs.status = "Progressing"
if ready ~= nil then
  hs.message = describe(ready)
else
  hs.message = "Waiting for etcd-hook to write the Ready condition"
end
return hs
