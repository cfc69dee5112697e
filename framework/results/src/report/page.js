
(function(){
  var errors=0;
  window.addEventListener('error',function(){errors++;document.body.setAttribute('data-errors',String(errors));});
  document.querySelectorAll('svg.chart .legend-item').forEach(function(item){
    item.addEventListener('click',function(){
      var svg=item.closest('svg');
      var s=svg.querySelector('.data .s'+item.getAttribute('data-series'));
      if(!s)return;
      var hide=s.style.display!=='none';
      s.style.display=hide?'none':'';
      item.style.opacity=hide?'0.35':'1';
    });
  });
  var charts=document.querySelectorAll('svg.chart'),drawn=0;
  charts.forEach(function(c){
    var r=c.getBoundingClientRect();
    var paths=c.querySelectorAll('.data path');
    var inked=Array.prototype.some.call(paths,function(p){return (p.getAttribute('d')||'').length>0;});
    if(r.width>0&&r.height>0&&inked)drawn++;
  });
  document.body.setAttribute('data-charts',String(charts.length));
  document.body.setAttribute('data-charts-drawn',String(drawn));
  document.body.setAttribute('data-errors',String(errors));
})();
